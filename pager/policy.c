/* SPDX-License-Identifier: MIT */
/*
 * The registry of built-in policies, and the loader of plug-ins. A new
 * policy is one file under pager/policy/ defining `const struct
 * kvt_policy_ops kvt_policy_NAME`; the build lists it in policies.h, so
 * nothing else changes. A plug-in is a shared object named by path in a
 * policy spec (policy.h); loaded ones are kept in a list for the life of
 * the process, under a lock, since pagers open in any thread.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvt/version.h>

#include "pager/policy.h"

const struct kvt_policy_ops *const kvt_policies[] = {
#define KVT_POLICY(sym) &sym,
#include "policies.h"
#undef KVT_POLICY
	NULL,
};

struct plugin {
	struct plugin *next;
	void *handle;			/* dlopen()'s, never closed */
	const struct kvt_policy_ops *ops;
	char path[];			/* as first given */
};

static pthread_mutex_t plugins_lock = PTHREAD_MUTEX_INITIALIZER;
static struct plugin *plugins;		/* loaded plug-ins, newest first */

#define PATH_LEN 4096

static const struct kvt_policy_ops *fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static const struct kvt_policy_ops *fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return NULL;
}

static const struct kvt_policy_ops *builtin(const char *name, size_t len)
{
	for (const struct kvt_policy_ops *const *p = kvt_policies; *p; p++)
		if (strlen((*p)->name) == len && !memcmp((*p)->name, name, len))
			return *p;
	return NULL;
}

/* What is wrong with a plug-in's table, or NULL. */
static const char *table_problem(const struct kvt_policy_ops *o)
{
	if (!o->name)
		return "name is NULL";
	if (!*o->name || strpbrk(o->name, ":/"))
		return "name is empty or holds ':' or '/'";
	if (!o->init)
		return "init is NULL";
	if (!o->destroy)
		return "destroy is NULL";
	if (!o->on_insert)
		return "on_insert is NULL";
	if (!o->on_access)
		return "on_access is NULL";
	if (!o->on_remove)
		return "on_remove is NULL";
	if (!o->victims)
		return "victims is NULL";
	if (o->flags & ~(unsigned)KVT_POLICY_OFFLINE)
		return "flags has unknown bits";
	return NULL;
}

/* Load the plug-in at path (lock held). */
static const struct kvt_policy_ops *plugin_load(const char *path, char *err, size_t errlen)
{
	const struct kvt_policy_ops *o;
	const char *why;
	struct plugin *p;
	void *h;

	dlerror();
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *d = dlerror();

		return fail(err, errlen, "cannot load: %s", d ? d : "unknown error");
	}
	for (p = plugins; p; p = p->next)
		if (p->handle == h) {
			dlclose(h);	/* one reference is enough: the first */
			return p->ops;
		}
	o = dlsym(h, KVT_POLICY_SYMBOL);
	if (!o) {
		dlclose(h);
		return fail(err, errlen, "no symbol %s (a const struct kvt_policy_ops)",
			    KVT_POLICY_SYMBOL);
	}
	/* Before anything else is read: another ABI's table has another
	 * layout. One from before the ABI field has the name pointer there. */
	if (o->abi != KVT_POLICY_ABI || o->size < sizeof(*o)) {
		if (o->abi == 0 || o->abi > 0xffff)
			fail(err, errlen, "%s carries no policy ABI version (.abi, .size: built for "
			     "a libkvt before 0.1.0?); libkvt %s takes ABI %u: rebuild it "
			     "against this libkvt's pager/policy.h", KVT_POLICY_SYMBOL,
			     KVT_VERSION_STRING, KVT_POLICY_ABI);
		else
			fail(err, errlen, "%s was built for policy ABI %u (table of %u bytes); "
			     "libkvt %s takes ABI %u (%zu bytes): rebuild it against this "
			     "libkvt's pager/policy.h", KVT_POLICY_SYMBOL, o->abi, o->size,
			     KVT_VERSION_STRING, KVT_POLICY_ABI, sizeof(*o));
		dlclose(h);
		return NULL;
	}
	why = table_problem(o);
	if (why) {
		dlclose(h);
		return fail(err, errlen, "%s: %s", KVT_POLICY_SYMBOL, why);
	}
	if (builtin(o->name, strlen(o->name))) {
		fail(err, errlen, "policy name '%s' is taken by a built-in policy", o->name);
		dlclose(h);
		return NULL;
	}
	for (p = plugins; p; p = p->next)
		if (!strcmp(p->ops->name, o->name)) {
			fail(err, errlen, "policy name '%s' is taken by another plug-in (%s)",
			     o->name, p->path);
			dlclose(h);
			return NULL;
		}
	p = malloc(sizeof(*p) + strlen(path) + 1);
	if (!p) {
		dlclose(h);
		return fail(err, errlen, "out of memory");
	}
	*p = (struct plugin){ .next = plugins, .handle = h, .ops = o };
	strcpy(p->path, path);
	plugins = p;
	return o;
}

const struct kvt_policy_ops *kvt_policy_load(const char *spec, char *err, size_t errlen)
{
	const struct kvt_policy_ops *o;
	char path[PATH_LEN];
	size_t len;

	if (err && errlen)
		*err = '\0';
	if (!spec)
		return fail(err, errlen, "no policy given");
	len = strcspn(spec, ":");
	if (!memchr(spec, '/', len)) {
		o = len ? builtin(spec, len) : NULL;
		return o ? o : fail(err, errlen, "no such policy");
	}
	if (len >= sizeof(path))
		return fail(err, errlen, "plug-in path too long (%zu bytes)", len);
	memcpy(path, spec, len);
	path[len] = '\0';
	pthread_mutex_lock(&plugins_lock);
	o = plugin_load(path, err, errlen);
	pthread_mutex_unlock(&plugins_lock);
	return o;
}

/* kvt_policy_load without the reason. */
const struct kvt_policy_ops *kvt_policy_find(const char *spec)
{
	return kvt_policy_load(spec, NULL, 0);
}

/* What follows the first ':' in spec, or "" when there is no ':'. The
 * result points into spec (or at a static ""), so it lives as long as spec. */
const char *kvt_policy_params(const char *spec)
{
	const char *c = spec ? strchr(spec, ':') : NULL;

	return c ? c + 1 : "";
}
