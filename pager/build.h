/* SPDX-License-Identifier: MIT */
/*
 * What this build of libkvt is: its version, the commit it was built
 * from, and its features. The tools' --version (tools/cli.c) and the
 * kvt_build_info metric (metrics.c) say it in the same words.
 */
#ifndef KVT_PAGER_BUILD_H
#define KVT_PAGER_BUILD_H

struct kvt_build {
	const char *version;	/* KVT_VERSION_STRING: "0.1.0" */
	const char *git;	/* `git describe --always --dirty` at build time,
				 * "" when the sources were not a git checkout */
	int cuda;		/* 1 if the build made the CUDA plug-in
				 * (nvcc was found, CUDA=0 not given) */
	const char *simd;	/* the cpu kernels' code on this cpu: "portable",
				 * "avx2" or "avx512" (kvt_cpu_simd) */
};

/* Fill *out; its strings are static. Thread-safe. */
void kvt_build_get(struct kvt_build *out);

#endif
