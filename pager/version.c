/* SPDX-License-Identifier: MIT */
/*
 * The library's version and what its build holds. KVT_BUILD_GIT and
 * KVT_BUILD_CUDA come from $(BUILD)/gen/buildinfo.h, which the Makefile
 * rewrites only when they change, so a commit relinks and nothing more.
 */
#include <kvt/version.h>

#include "buildinfo.h"		/* $(BUILD)/gen: KVT_BUILD_GIT, KVT_BUILD_CUDA */
#include "kernels/cpu/kernels.h"
#include "pager/build.h"

#define KVT_API __attribute__((visibility("default")))

KVT_API const char *kvt_version(void)
{
	return KVT_VERSION_STRING;
}

void kvt_build_get(struct kvt_build *out)
{
	static const char *const simd[] = { "portable", "avx2", "avx512" };
	int s = kvt_cpu_simd();

	out->version = KVT_VERSION_STRING;
	out->git = KVT_BUILD_GIT;
	out->cuda = KVT_BUILD_CUDA;
	out->simd = s >= 0 && s <= 2 ? simd[s] : "unknown";
}
