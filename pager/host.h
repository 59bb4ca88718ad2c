/* SPDX-License-Identifier: MIT */
/*
 * The host tier's memory: one mapping, huge pages where the system allows,
 * placed with libnuma, locked with mlock, prefaulted by several threads.
 */
#ifndef KVT_PAGER_HOST_H
#define KVT_PAGER_HOST_H

#include <stddef.h>
#include <stdint.h>

struct kvt_host_arena {
	void	*base;		/* bytes usable at base */
	size_t	 bytes;		/* as requested (rounded up to 4 KiB only) */
	size_t	 mapped;	/* length of the mapping (>= bytes) */
	int	 hugepages;	/* enum kvt_hugepages obtained: OFF, HUGETLB or THP */
	int	 mlocked;	/* 1 if the whole mapping is locked */
	int	 numa_node;	/* node bound to, KVT_NUMA_ANY or KVT_NUMA_INTERLEAVE */
	char	 notes[256];	/* what could not be had and why; "" if all was */
};

/* Map and prepare bytes of host memory. hugepages: enum kvt_hugepages;
 * mlock_mode: enum kvt_tristate; numa_node: node or KVT_NUMA_*;
 * threads: prefault threads (0 = online cpus). Returns 0 or -errno
 * (-ENOMEM; a required feature missing: -EPERM for mlock, -ENOMEM for
 * hugetlb, -EINVAL for a bad node). */
/* numa_node | KVT_NUMA_PREFER: the node preferred (MPOL_PREFERRED), not
 * bound: pages go elsewhere when it is full. For a node the pager picked
 * (the GPU's) rather than one the configuration named. */
#define KVT_NUMA_PREFER	(1 << 20)
int  kvt_host_arena_open(struct kvt_host_arena *a, size_t bytes, int hugepages,
			 int mlock_mode, int numa_node, unsigned threads);
void kvt_host_arena_close(struct kvt_host_arena *a);

#endif
