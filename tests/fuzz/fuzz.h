/* SPDX-License-Identifier: MIT */
/*
 * Shared by the fuzz targets (libFuzzer: each file defines
 * LLVMFuzzerTestOneInput). The readers under test take paths, so an input
 * is handed to them as a file: a memfd, named /proc/self/fd/N, rewritten
 * for every input, so nothing is left on disk and nothing is shared
 * between targets run side by side.
 *
 * A target fails by aborting (FUZZ_CHECK): libFuzzer reports it as a
 * crash and keeps the input. The sanitizers report the rest.
 */
#ifndef KVT_TESTS_FUZZ_H
#define KVT_TESTS_FUZZ_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* An invariant the code under test promises: abort with where and what. */
#define FUZZ_CHECK(x) do { if (!(x)) { \
	fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #x); \
	abort(); } } while (0)

/* A memfd of its own per slot (a target may need an input and an output
 * file), created on first use. */
struct fuzz_file {
	int fd;
	char path[64];
};

static inline void fuzz_file_init(struct fuzz_file *f, const char *name)
{
	if (f->path[0])
		return;
	f->fd = memfd_create(name, MFD_CLOEXEC);
	if (f->fd < 0) {
		perror("memfd_create");
		abort();
	}
	snprintf(f->path, sizeof(f->path), "/proc/self/fd/%d", f->fd);
}

/* Make f hold exactly the n bytes at p; its path names it. */
static inline const char *fuzz_file_set(struct fuzz_file *f, const char *name,
					const void *p, size_t n)
{
	fuzz_file_init(f, name);
	if (ftruncate(f->fd, 0) || (n && pwrite(f->fd, p, n, 0) != (ssize_t)n)) {
		perror("memfd write");
		abort();
	}
	return f->path;
}

/* An empty f, for a writer to fill. */
static inline const char *fuzz_file_empty(struct fuzz_file *f, const char *name)
{
	return fuzz_file_set(f, name, NULL, 0);
}

/* A NUL-terminated copy of the input (the parsers of text take C strings). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = 0;
	return s;
}

/* err must hold one line, NUL-terminated, when a call failed: the library
 * promises a message naming what is wrong. */
static inline void fuzz_check_err(const char *err, size_t cap)
{
	FUZZ_CHECK(memchr(err, 0, cap) != NULL);
	FUZZ_CHECK(err[0] != 0);
	FUZZ_CHECK(strchr(err, '\n') == NULL);
}

#endif
