/* SPDX-License-Identifier: MIT */
/*
 * Backend plug-ins: how libkvt finds, checks and refuses them, and what it
 * says when the GPU path cannot be had. "cuda" asked for by name fails
 * with the reason; "auto" falls back to the cpu and says why; a plug-in
 * that is missing, not a backend, built for another ABI, named otherwise,
 * without a device or without kernels is refused with one line naming
 * the problem. And the tools and libkvt.so never link a CUDA library
 * (ldd), so they run where there is none.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "kernels/device.h"

static char build[PATH_MAX];

static void use_dir(const char *dir)
{
	CHECK_EQ(setenv("KVT_PLUGIN_DIR", dir, 1), 0);
}

/* Open name; expect ret, and why to contain want (NULL: empty). Returns
 * the device when it opened. */
static struct kvt_device *expect(const char *name, int ret, const char *want)
{
	struct kvt_device *d = NULL;
	char why[1024];
	int r = kvt_device_open_why(name, 0, &d, why, sizeof(why));

	printf("%-5s -> %-4d %s\n", name, r, why);
	CHECK_EQ(r, ret);
	if (want)
		CHECK(strstr(why, want));
	else
		CHECK(!why[0]);
	CHECK(!strchr(why, '\n'));
	return r ? NULL : d;
}

static void copy_file(const char *from, const char *to)
{
	char cmd[2 * PATH_MAX + 256];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	CHECK_EQ(system(cmd), 0);
}

/* No CUDA library in what ldd lists for path. */
static void no_cuda(const char *path)
{
	char cmd[PATH_MAX + 256], line[1024];
	FILE *f;
	int n = 0;

	if (access(path, X_OK) && access(path, R_OK))
		return;
	snprintf(cmd, sizeof(cmd), "ldd '%s' 2>&1", path);
	CHECK(f = popen(cmd, "r"));
	while (fgets(line, sizeof(line), f)) {
		n++;
		if (strstr(line, "libcuda") || strstr(line, "libcublas") || strstr(line, "libnvidia")) {
			fprintf(stderr, "%s links %s", path, line);
			exit(1);
		}
	}
	pclose(f);
	CHECK(n > 0);
	printf("ldd %-40s no CUDA library\n", path);
}

int main(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 64];
	struct kvt_device *d;
	ssize_t n = readlink("/proc/self/exe", build, sizeof(build) - 1);

	CHECK(n > 0);
	build[n] = 0;
	*strrchr(build, '/') = 0;
	*strrchr(build, '/') = 0;		/* build/tests/t_backend -> build */
	snprintf(dir, sizeof(dir), "%s/kvt-backend-%d", t_dir(), (int)getpid());
	CHECK_EQ(mkdir(dir, 0700), 0);

	/* Bad names never reach the file system. */
	expect("", -EINVAL, "expected cpu, cuda or auto");
	expect("../x", -EINVAL, "expected cpu, cuda or auto");
	kvt_device_close(expect("cpu", 0, NULL));

	/* No plug-in: cuda by name fails, auto runs on the cpu and says why. */
	use_dir(dir);
	expect("cuda", -ENODEV, "no plug-in libkvt-cuda.so");
	d = expect("auto", 0, "; using cpu");
	CHECK(!strcmp(kvt_device_name(d), "cpu"));
	kvt_device_close(d);

	/* Not a backend: a policy plug-in under the name, a file that is not
	 * a shared object. */
	char policy[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/libkvt-cuda.so", dir);
	snprintf(policy, sizeof(policy), "%s/plugins/example.so", build);
	copy_file(policy, path);
	expect("cuda", -ENODEV, "exports no kvt_backend_plugin_v1");
	FILE *f = fopen(path, "w");
	CHECK(f);
	fputs("not an ELF file\n", f);
	fclose(f);
	expect("cuda", -ENODEV, "cannot load");
	unlink(path);

	/* Plug-ins that the loader refuses or that find nothing. */
	snprintf(path, sizeof(path), "%s/fake/abi", build);
	use_dir(path);
	expect("cuda", -ENODEV, "built for plug-in ABI 99");
	snprintf(path, sizeof(path), "%s/fake/name", build);
	use_dir(path);
	expect("cuda", -ENODEV, "calls itself \"emu\"");
	snprintf(path, sizeof(path), "%s/fake/nodev", build);
	use_dir(path);
	expect("cuda", -ENODEV, "cuda: fake: no device here");
	d = expect("auto", 0, "cuda: fake: no device here; using cpu");
	kvt_device_close(d);
	snprintf(path, sizeof(path), "%s/fake/nokernels", build);
	use_dir(path);
	expect("cuda", -ENODEV, "without memory ops or kernels");

	/* The emulated GPU loads, and describes itself. */
	use_dir(build);
	d = expect("emu", 0, NULL);
	struct kvt_device_info di;
	CHECK_EQ(kvt_device_info(d, &di), 0);
	CHECK(!strcmp(di.name, "emu") && strstr(di.desc, "emulated"));
	CHECK_EQ(di.host_addressable, 1);
	kvt_device_close(d);

	/* The real plug-in, where it was built: on a machine without a GPU it
	 * loads and says what is missing; with one it opens. */
	snprintf(path, sizeof(path), "%s/libkvt-cuda.so", build);
	if (!access(path, R_OK)) {
		char why[1024];
		int r = kvt_device_open_why("cuda", 0, &d, why, sizeof(why));

		printf("cuda  -> %-4d %s\n", r, why);
		if (r) {
			CHECK_EQ(r, -ENODEV);
			CHECK(strstr(why, "cuda: ") == why && !strchr(why, '\n'));
			CHECK(strstr(why, "driver") || strstr(why, "device") ||
			      strstr(why, "libcuda") || strstr(why, "cannot load"));
		} else {
			CHECK(!strcmp(kvt_device_name(d), "cuda"));
			kvt_device_close(d);
		}
		d = expect("auto", 0, r ? "; using cpu" : NULL);
		CHECK(!strcmp(kvt_device_name(d), r ? "cpu" : "cuda"));
		kvt_device_close(d);
	} else {
		printf("cuda plug-in not built (make CUDA=0, or no nvcc): its load not checked\n");
	}

	/* Nothing of ours links CUDA. */
	static const char *const bins[] = { "kvt-run", "kvt-bench", "kvt-sim", "kvt-trace",
					    "kvt-demo", "kvt-mkmodel", "kvtctl", "libkvt.so" };
	for (unsigned i = 0; i < sizeof(bins) / sizeof(bins[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", build, bins[i]);
		no_cuda(path);
	}
	rmdir(dir);
	return 0;
}
