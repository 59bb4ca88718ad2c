/* SPDX-License-Identifier: MIT */
/*
 * kvtier configuration: one plain struct with defaults, filled from an INI
 * file or key=value pairs. Every key is documented in docs/config.md.
 *
 * All functions return 0 or -errno. On failure they write one line naming
 * the file, line, key and the accepted range into err (when err != NULL)
 * and leave *cfg unchanged.
 */
#ifndef KVT_CONFIG_H
#define KVT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kvt_tier_id {
	KVT_TIER_FAST = 0,	/* device memory (or the cpu device's arena) */
	KVT_TIER_HOST = 1,	/* pinned host RAM */
	KVT_TIER_NVME = 2,	/* O_DIRECT file or block device */
	KVT_NTIERS = 3,
};

enum kvt_tristate {
	KVT_OFF = 0,
	KVT_AUTO = 1,		/* use it where the system allows, report if not */
	KVT_ON = 2,		/* required: opening fails without it */
};

/* access.host_in_place = auto: read the host tier in place where copying
 * a page into the fast tier would be a plain memcpy (the cpu device). */
#define KVT_IN_PLACE_AUTO 2

enum kvt_hugepages {
	KVT_HUGE_OFF = 0,
	KVT_HUGE_AUTO = 1,	/* MAP_HUGETLB, else THP via madvise, else 4 KiB */
	KVT_HUGE_HUGETLB = 2,	/* MAP_HUGETLB or fail */
	KVT_HUGE_THP = 3,	/* madvise(MADV_HUGEPAGE) only */
};

#define KVT_NUMA_ANY		(-1)	/* leave placement to the kernel */
#define KVT_NUMA_INTERLEAVE	(-2)	/* interleave over all nodes */

#define KVT_POLICY_MAX	64
#define KVT_PATH_MAX	4096

/* Log levels passed to the log callback. */
enum kvt_log_level { KVT_LOG_ERROR = 0, KVT_LOG_WARN = 1, KVT_LOG_INFO = 2, KVT_LOG_DEBUG = 3 };

/* Library code never prints: messages go through this callback (NULL: dropped). */
typedef void (*kvt_log_fn)(void *arg, int level, const char *msg);

struct kvt_tier_config {
	uint64_t bytes;			/* capacity; rounded down to whole frames */
	uint64_t max_bytes;		/* fast, host: frames reserved at open, the
					 * most a live change may grow it to;
					 * 0 = bytes (no growing) */
	char	 policy[KVT_POLICY_MAX];/* "name" or "name:key=value,..." */
	/* Watermarks in per cent of the tier's frames kept free (kswapd):
	 * below low the migration thread demotes in the background until
	 * high is free; an allocation that would go below min waits for
	 * (synchronous) reclaim. 0 <= min <= low <= high <= 50. */
	unsigned wm_min, wm_low, wm_high;
};

struct kvt_config {
	/* Geometry of one page: K and V of page_tokens tokens of one layer.
	 * page bytes = page_tokens * n_kv_heads * head_dim * 2 * dtype_bytes */
	unsigned n_layers;
	unsigned n_kv_heads;
	unsigned head_dim;
	unsigned page_tokens;
	unsigned dtype_bytes;		/* 2 (f16/bf16) or 4 (f32) */

	struct kvt_tier_config tier[KVT_NTIERS];

	/* NVMe tier */
	char	 nvme_path[KVT_PATH_MAX];	/* file to create, block device, or
						 * directory (a temp file is made in it
						 * and unlinked); "" = $TMPDIR or /tmp */
	int	 nvme_direct;		/* enum kvt_tristate: O_DIRECT */
	unsigned io_depth;		/* io_uring queue depth, 1..4096 */
	uint64_t max_io_bytes;		/* largest coalesced request */

	/* Host tier */
	int	 host_numa_node;	/* node, KVT_NUMA_ANY or KVT_NUMA_INTERLEAVE */
	int	 host_hugepages;	/* enum kvt_hugepages */
	int	 host_mlock;		/* enum kvt_tristate */
	unsigned host_prefault_threads;	/* 0 = one per online cpu, max 64 */

	/* Access */
	int	 host_in_place;		/* acquire may hand back host-tier pages:
					 * 0 no, 1 yes, KVT_IN_PLACE_AUTO yes where
					 * device memory is host memory (cpu) */
	unsigned prefetch_depth;	/* layers queued ahead of an acquire */

	/* Memory pressure: the host tier shrinks toward host_floor while the
	 * "some" avg10 of psi_path is at or above psi_threshold per cent, and
	 * grows back to tier.host.bytes once it is below half of that. */
	char	 psi_path[KVT_PATH_MAX];	/* default /proc/pressure/memory */
	double	 psi_threshold;		/* per cent 0..100; 0 = no watcher */
	unsigned psi_interval_ms;	/* how often it is read, 10..60000 */
	uint64_t host_floor;		/* bytes the host tier keeps (0: 2 frames) */

	/* Metrics over HTTP: "127.0.0.1:9187" serves GET /metrics there
	 * (loopback addresses only; port 0 = any free port); "" = off. */
	char	 metrics_http[64];

	/* Control socket (kvt_control_start): a client that sends and reads
	 * nothing for this long is closed, so silent clients cannot hold
	 * every slot; 0 = never. Read when the socket starts. */
	unsigned control_idle_ms;	/* default 30000, max 86400000 (a day) */

	/* Device (used by tools that open the device from a config) */
	char	 device[32];		/* "cpu", "cuda" or "auto" */
	double	 copy_gbps;		/* cpu device: copy bandwidth cap, 0 = none */

	/* Fault injection on the NVMe tier (fault.*, docs/config.md): one
	 * request in N of a kind fails that way, 0 = never. Only a library
	 * built with -DKVT_FAULTS accepts non-zero values (kvt_config_set,
	 * kvt_config_validate); the fields are there in every build, so the
	 * struct is the same whatever the flag. */
	unsigned fault_eio;		/* reads and writes complete with -EIO */
	unsigned fault_short;		/* a read completes short (and is retried) */
	unsigned fault_enospc;		/* writes complete with -ENOSPC */
	unsigned fault_flip;		/* a read has one bit flipped (XXH3 fails) */
	unsigned fault_slow_us;		/* every completion is delayed this long */

	kvt_log_fn log;
	void	  *log_arg;
};

/* Fill *cfg with the documented defaults. */
void kvt_config_default(struct kvt_config *cfg);

/* Set one key ("section.key" as in the INI file, e.g. "tier.fast.bytes",
 * "io.depth") from its text value. Sizes take K/M/G/T suffixes (binary). */
int kvt_config_set(struct kvt_config *cfg, const char *key, const char *value,
		   char *err, size_t errlen);

/* Load an INI file over *cfg (unset keys keep their values). All or
 * nothing: on any error *cfg is unchanged. */
int kvt_config_load(struct kvt_config *cfg, const char *path, char *err, size_t errlen);

/* kvt_config_load, and then, only if it succeeded, seen(arg, key) once for
 * each key the file set ("section.key", in kvt_config_print's order; seen
 * may be NULL): so a caller can tell a value the file gives from the same
 * value left at its default. */
int kvt_config_load_keys(struct kvt_config *cfg, const char *path,
			 void (*seen)(void *arg, const char *key), void *arg,
			 char *err, size_t errlen);

/* Cross-field checks (watermark order, geometry, sizes). */
int kvt_config_validate(const struct kvt_config *cfg, char *err, size_t errlen);

/* Bytes of one page for this geometry. */
uint64_t kvt_config_page_bytes(const struct kvt_config *cfg);

/* Write the effective configuration as an INI file into buf. Returns the
 * length written (excluding NUL) or -ENOSPC when buf is too small. */
int kvt_config_print(const struct kvt_config *cfg, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
