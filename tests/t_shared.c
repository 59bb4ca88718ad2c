/* SPDX-License-Identifier: MIT */
/* The shared library exports the public API, versioned, and nothing else. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "common.h"

int main(void)
{
	const char *build = getenv("BUILD");
	char path[1024];
	void *h;

	snprintf(path, sizeof(path), "%s/libkvt.so", build && *build ? build : "build");
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		SKIP("cannot load %s: %s", path, dlerror());
	static const char *const pub[] = { "kvt_pager_open", "kvt_pager_close", "kvt_acquire",
		"kvt_batch_next", "kvt_batch_release", "kvt_seq_open", "kvt_seq_append",
		"kvt_config_load", "kvt_stats_json", "kvt_stats_prometheus", "kvt_device_open",
		"kvt_pager_config", "kvt_pager_set", "kvt_control_start", "kvt_control_stop",
		"kvt_version" };
	for (size_t i = 0; i < sizeof(pub) / sizeof(pub[0]); i++) {
		CHECK(dlsym(h, pub[i]) != NULL);
		CHECK(dlvsym(h, pub[i], "KVT_0.1") != NULL);
	}
	/* Internals stay inside. */
	static const char *const priv[] = { "kvt_nvme_run", "kvt_host_arena_open",
		"kvt_policy_find", "kvt_pager_check", "kvt_cpu_device_open", "kvt_lat_record" };
	for (size_t i = 0; i < sizeof(priv) / sizeof(priv[0]); i++)
		if (dlsym(h, priv[i])) {
			fprintf(stderr, "%s is exported\n", priv[i]);
			return 1;
		}
	/* The library works through the loaded copy too. */
	void (*cfg_default)(struct kvt_config *) = (void (*)(struct kvt_config *))dlsym(h, "kvt_config_default");
	uint64_t (*page_bytes)(const struct kvt_config *) =
		(uint64_t (*)(const struct kvt_config *))dlsym(h, "kvt_config_page_bytes");
	struct kvt_config cfg;
	cfg_default(&cfg);
	CHECK_EQ(page_bytes(&cfg), 64 << 10);
	dlclose(h);
	return 0;
}
