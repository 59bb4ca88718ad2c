/* SPDX-License-Identifier: MIT */
/*
 * The host tier's memory. One anonymous private mapping, set up in this
 * order, each step before the one that faults pages in:
 *
 *   1. mmap: MAP_HUGETLB, else a 2 MiB aligned mapping advised
 *      MADV_HUGEPAGE (THP), else plain pages (per enum kvt_hugepages);
 *   2. NUMA placement with mbind (bind to one node, or interleave), so the
 *      first touch already lands on the right node;
 *   3. parallel prefault: N threads, each MADV_POPULATE_WRITE (or a write
 *      per page) over one contiguous slice;
 *   4. mlock, which then only has to pin pages that are already there.
 *
 * Whatever an AUTO setting could not get is recorded in a->notes with the
 * errno text; only a required feature (HUGETLB, mlock ON, a node that does
 * not exist) fails the open. No printing: libnuma's own calls that print
 * or exit on error (numa_tonode_memory, numa_interleave_memory,
 * numa_bitmask_alloc) are avoided in favour of mbind(2) directly.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <numa.h>
#include <numaif.h>
#include <kvt/config.h>
#include "host.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23	/* Linux 5.14 */
#endif

#define SZ_4K		((size_t)4096)
#define SZ_2M		((size_t)2 << 20)
#define SZ_64M		((size_t)64 << 20)
#define MAX_THREADS	64
#define MAX_NODES	1024	/* nodemask bits we pass to mbind */

#define THP_ENABLED	"/sys/kernel/mm/transparent_hugepage/enabled"

/* Append one "; "-separated entry to a->notes; silently truncated. */
static void note(struct kvt_host_arena *a, const char *fmt, ...)
{
	size_t len = strlen(a->notes);
	va_list ap;

	if (len + 3 >= sizeof(a->notes))
		return;
	if (len) {
		memcpy(a->notes + len, "; ", 3);
		len += 2;
	}
	va_start(ap, fmt);
	vsnprintf(a->notes + len, sizeof(a->notes) - len, fmt, ap);
	va_end(ap);
}

/* Put one entry before the others in a->notes: the reason an open fails
 * comes first, ahead of what an AUTO setting did without. Truncated as
 * note() is. */
static void note_first(struct kvt_host_arena *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void note_first(struct kvt_host_arena *a, const char *fmt, ...)
{
	char rest[sizeof(a->notes)];
	va_list ap;

	memcpy(rest, a->notes, sizeof(rest));
	va_start(ap, fmt);
	vsnprintf(a->notes, sizeof(a->notes), fmt, ap);
	va_end(ap);
	if (rest[0])
		note(a, "%s", rest);
}

/* Round x up to a multiple of the power of two align; 0 on overflow. */
static size_t round_up(size_t x, size_t align)
{
	if (x > SIZE_MAX - (align - 1))
		return 0;
	return (x + align - 1) & ~(align - 1);
}

/* Default huge page size (what MAP_HUGETLB gets), from /proc/meminfo;
 * 2 MiB if that cannot be read. */
static size_t hugetlb_page_size(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	unsigned long kb = 0;

	if (f) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "Hugepagesize: %lu kB", &kb) == 1)
				break;
		fclose(f);
	}
	if (!kb || (kb & (kb - 1)))
		return SZ_2M;
	return (size_t)kb << 10;
}

/* 1 if THP may be used via madvise, 0 if the system says [never],
 * -1 if it cannot tell (no sysfs file: try madvise and see). */
static int thp_allowed(void)
{
	FILE *f = fopen(THP_ENABLED, "re");
	char line[128];
	int ret = -1;

	if (!f)
		return -1;
	if (fgets(line, sizeof(line), f))
		ret = strstr(line, "[never]") ? 0 : 1;
	fclose(f);
	return ret;
}

/* Step 1 with MAP_HUGETLB: the length is rounded up to the huge page
 * size for this mapping only. Returns 0 or -errno, nothing mapped. */
static int map_hugetlb(struct kvt_host_arena *a, size_t *stride)
{
	size_t hp = hugetlb_page_size();
	size_t len = round_up(a->bytes, hp);
	void *p;

	if (!len)
		return -ENOMEM;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	a->base = p;
	a->mapped = len;
	a->hugepages = KVT_HUGE_HUGETLB;
	*stride = hp;
	return 0;
}

/* Step 1 with THP: over-map by 2 MiB, trim head and tail so that exactly
 * a->bytes remain at a 2 MiB aligned address, then MADV_HUGEPAGE. A failed
 * madvise leaves a usable plain mapping (noted). Returns 0 or -errno. */
static int map_thp(struct kvt_host_arena *a)
{
	size_t len = a->bytes + SZ_2M, head, tail;
	char *p, *q;

	if (len < a->bytes)
		return -ENOMEM;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	q = (char *)(((uintptr_t)p + SZ_2M - 1) & ~(uintptr_t)(SZ_2M - 1));
	head = (size_t)(q - p);
	tail = len - head - a->bytes;
	if (head)
		munmap(p, head);
	if (tail)
		munmap(q + a->bytes, tail);
	a->base = q;
	a->mapped = a->bytes;
	if (madvise(q, a->bytes, MADV_HUGEPAGE)) {
		note(a, "thp: madvise: %s", strerror(errno));
		a->hugepages = KVT_HUGE_OFF;
	} else {
		a->hugepages = KVT_HUGE_THP;
	}
	return 0;
}

static int map_plain(struct kvt_host_arena *a)
{
	size_t len = round_up(a->bytes, (size_t)sysconf(_SC_PAGESIZE));
	void *p;

	if (!len)
		return -ENOMEM;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	a->base = p;
	a->mapped = len;
	a->hugepages = KVT_HUGE_OFF;
	return 0;
}

/* Step 1. *stride: the size of one page of the mapping (what a touch
 * faults in). Returns 0 or -errno with nothing mapped. */
static int map_arena(struct kvt_host_arena *a, int mode, size_t *stride)
{
	int ret, thp;

	*stride = (size_t)sysconf(_SC_PAGESIZE);
	if (mode == KVT_HUGE_HUGETLB || mode == KVT_HUGE_AUTO) {
		ret = map_hugetlb(a, stride);
		if (!ret || mode == KVT_HUGE_HUGETLB) {
			if (ret)
				note(a, "hugetlb: %s", strerror(-ret));
			return ret;
		}
		note(a, "hugetlb: %s", strerror(-ret));
	}
	if (mode == KVT_HUGE_AUTO || mode == KVT_HUGE_THP) {
		thp = thp_allowed();
		if (thp)
			return map_thp(a);
		note(a, "thp: disabled ([never])");
	}
	return map_plain(a);
}

/* Step 2. Never fails: a missing libnuma or a failed mbind is noted and
 * leaves the kernel's default placement (a->numa_node = KVT_NUMA_ANY).
 * The node number was checked by the caller. */
static void place_arena(struct kvt_host_arena *a, int node)
{
	unsigned long mask[MAX_NODES / (8 * sizeof(unsigned long))];
	int prefer = node >= 0 && (node & KVT_NUMA_PREFER);

	node &= ~(prefer ? KVT_NUMA_PREFER : 0);
	a->numa_node = KVT_NUMA_ANY;
	if (node == KVT_NUMA_ANY)
		return;
	if (numa_available() < 0) {
		note(a, "numa: not available, %s not applied",
		     node == KVT_NUMA_INTERLEAVE ? "interleave" : "node binding");
		return;
	}
	if (node == KVT_NUMA_INTERLEAVE) {
		/* maxnode + 1: the kernel drops one bit (libnuma does the same). */
		if (mbind(a->base, a->mapped, MPOL_INTERLEAVE,
			  numa_all_nodes_ptr->maskp, numa_all_nodes_ptr->size + 1, 0)) {
			note(a, "numa: mbind interleave: %s", strerror(errno));
			return;
		}
	} else {
		memset(mask, 0, sizeof(mask));
		mask[node / (8 * sizeof(unsigned long))] |=
			1UL << (node % (8 * sizeof(unsigned long)));
		if (mbind(a->base, a->mapped, prefer ? MPOL_PREFERRED : MPOL_BIND, mask,
			  MAX_NODES + 1, 0)) {
			note(a, "numa: mbind node %d: %s", node, strerror(errno));
			return;
		}
	}
	a->numa_node = node;
}

struct slice {
	char	*p;
	size_t	 len;
	size_t	 stride;	/* bytes per page: one write faults one page */
	int	 populate;	/* use MADV_POPULATE_WRITE */
	int	 err;		/* 0 or -errno */
	pthread_t tid;
};

/* Fault in one slice. Writing a zero byte keeps the (already zero)
 * contents and forces a private, writable page. */
static void *prefault_slice(void *arg)
{
	struct slice *s = arg;
	volatile char *v = (volatile char *)s->p;
	size_t off;

	if (s->populate) {
		while (madvise(s->p, s->len, MADV_POPULATE_WRITE)) {
			if (errno != EINTR) {
				s->err = -errno;
				break;
			}
		}
		return NULL;
	}
	for (off = 0; off < s->len; off += s->stride)
		v[off] = 0;
	return NULL;
}

/* Step 3: threads (0 = online cpus; at most MAX_THREADS and one per 64 MiB)
 * fault in contiguous slices; the calling thread takes the first slice and
 * any whose thread could not be created. Returns 0 or -errno (a populate
 * that failed, e.g. -ENOMEM). */
static int prefault(struct kvt_host_arena *a, size_t stride, unsigned threads)
{
	struct slice s[MAX_THREADS];
	size_t pages = a->mapped / stride, per, rem, off = 0;
	unsigned n = threads, i, started;
	int populate = 0, err = 0;
	long cpus;

	if (!n) {
		cpus = sysconf(_SC_NPROCESSORS_ONLN);
		n = cpus > 0 ? (unsigned)(cpus < MAX_THREADS ? cpus : MAX_THREADS) : 1;
	}
	if (n > MAX_THREADS)
		n = MAX_THREADS;
	if (n > a->mapped / SZ_64M)
		n = a->mapped / SZ_64M ? (unsigned)(a->mapped / SZ_64M) : 1;

	/* Probe once: EINVAL means a kernel before 5.14 (touch instead). */
	if (!madvise(a->base, stride, MADV_POPULATE_WRITE))
		populate = 1;
	else if (errno != EINVAL && errno != EINTR)
		return -errno;

	per = pages / n;
	rem = pages % n;
	for (i = 0; i < n; i++) {
		size_t np = per + (i < rem);

		s[i] = (struct slice){ .p = (char *)a->base + off, .len = np * stride,
				       .stride = stride, .populate = populate };
		off += np * stride;
	}
	for (started = 1; started < n; started++)
		if (pthread_create(&s[started].tid, NULL, prefault_slice, &s[started]))
			break;
	prefault_slice(&s[0]);
	for (i = started; i < n; i++)
		prefault_slice(&s[i]);
	for (i = 1; i < started; i++)
		pthread_join(s[i].tid, NULL);
	for (i = 0; i < n && !err; i++)
		err = s[i].err;
	return err;
}

/* Step 4. Returns 0 (locked, or AUTO and noted) or -errno for ON: -EPERM
 * when RLIMIT_MEMLOCK does not allow the size, else mlock's errno; for
 * ON the first note then says why, naming RLIMIT_MEMLOCK and the way
 * out. */
static int lock_arena(struct kvt_host_arena *a, int mode)
{
	struct rlimit rl = { 0, 0 };
	int err;

	if (mode == KVT_OFF)
		return 0;
	if (!mlock(a->base, a->mapped)) {
		a->mlocked = 1;
		return 0;
	}
	err = errno;
	/* A failed mlock may leave part of the range locked. */
	munlock(a->base, a->mapped);
	getrlimit(RLIMIT_MEMLOCK, &rl);
	if (mode != KVT_ON) {
		if (rl.rlim_cur == RLIM_INFINITY)
			note(a, "mlock: %s (RLIMIT_MEMLOCK unlimited)", strerror(err));
		else
			note(a, "mlock: %s (RLIMIT_MEMLOCK %llu bytes, need %zu)",
			     strerror(err), (unsigned long long)rl.rlim_cur, a->mapped);
		return 0;
	}
	if ((err == ENOMEM || err == EPERM) && rl.rlim_cur != RLIM_INFINITY &&
	    a->mapped > rl.rlim_cur) {
		note_first(a, "mlock=on: RLIMIT_MEMLOCK is %llu bytes, the host tier needs %zu "
			   "(raise it: ulimit -l, systemd LimitMEMLOCK=; or set host.mlock=auto)",
			   (unsigned long long)rl.rlim_cur, a->mapped);
		return -EPERM;
	}
	if (rl.rlim_cur == RLIM_INFINITY)
		note_first(a, "mlock=on: %s (RLIMIT_MEMLOCK unlimited)", strerror(err));
	else
		note_first(a, "mlock=on: %s (RLIMIT_MEMLOCK %llu bytes, need %zu)",
			   strerror(err), (unsigned long long)rl.rlim_cur, a->mapped);
	return -err;
}

/*
 * Contract: on success *a describes the arena (see host.h) and must be
 * released with kvt_host_arena_close. On failure nothing stays mapped and
 * *a is zeroed except a->notes, which says what was tried; closing it is
 * a no-op. Node numbers other than KVT_NUMA_ANY/INTERLEAVE must be in
 * [0, min(numa_max_node(), 1023)], else -EINVAL.
 */
int kvt_host_arena_open(struct kvt_host_arena *a, size_t bytes, int hugepages,
			int mlock_mode, int numa_node, unsigned threads)
{
	size_t stride;
	int ret;

	memset(a, 0, sizeof(*a));
	if (!bytes || hugepages < KVT_HUGE_OFF || hugepages > KVT_HUGE_THP ||
	    mlock_mode < KVT_OFF || mlock_mode > KVT_ON)
		return -EINVAL;
	int node = numa_node >= 0 ? numa_node & ~KVT_NUMA_PREFER : numa_node;
	if (node != KVT_NUMA_ANY && node != KVT_NUMA_INTERLEAVE &&
	    (node < 0 || node >= MAX_NODES || node > numa_max_node()))
		return -EINVAL;
	a->bytes = round_up(bytes, SZ_4K);
	if (!a->bytes)
		return -ENOMEM;

	ret = map_arena(a, hugepages, &stride);
	if (ret)
		goto err;
	place_arena(a, numa_node);
	ret = prefault(a, stride, threads);
	if (ret) {
		note(a, "prefault: %s", strerror(-ret));
		goto err;
	}
	ret = lock_arena(a, mlock_mode);
	if (ret)
		goto err;
	return 0;
err:
	if (a->base)
		munmap(a->base, a->mapped);
	{
		char notes[sizeof(a->notes)];

		memcpy(notes, a->notes, sizeof(notes));
		memset(a, 0, sizeof(*a));
		memcpy(a->notes, notes, sizeof(notes));
	}
	return ret;
}

/* Unlock, unmap and zero *a. A zeroed (or failed-open) arena is a no-op. */
void kvt_host_arena_close(struct kvt_host_arena *a)
{
	if (!a->base) {
		memset(a, 0, sizeof(*a));
		return;
	}
	if (a->mlocked)
		munlock(a->base, a->mapped);
	munmap(a->base, a->mapped);
	memset(a, 0, sizeof(*a));
}
