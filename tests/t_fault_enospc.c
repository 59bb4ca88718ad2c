/* SPDX-License-Identifier: MIT */
/*
 * Disk full: every NVMe write completes with -ENOSPC. Demoting the host
 * tier then fails, keeps every page where it is, pauses demotion to NVMe
 * (stats.nvme_paused, stats.enospc) and loses nothing: every page still
 * reads back bit-exact. With the fault cleared and the pause (100 ms) over,
 * draining the host tier again takes the pages down to NVMe, and they
 * still read back intact.
 */
#include <errno.h>
#include <unistd.h>
#include "fault_common.h"

#define LAYERS	2u
#define NPG	50u	/* full pages per layer: 100 pages */
#define SEED	23u

int main(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	kvt_seq_t s;

	t_config(&cfg, LAYERS, 8, 200, 256);
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_seq_open(p, &s), 0);

	struct kvt_fault f = { .enospc_every = 1 };
	fault_set(p, &f);
	t_append(p, s, &cfg, SEED, 0, NPG * cfg.page_tokens);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.tier[KVT_TIER_NVME].used, 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used + st.tier[KVT_TIER_HOST].used, LAYERS * NPG);

	/* Force demotion to NVMe: every write fails. */
	int r = kvt_pager_drain(p, KVT_TIER_HOST);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	fprintf(stderr, "drain(host) with the disk full: %d (%s), host used %llu, enospc %llu\n",
		r, r ? strerror(-r) : "ok", (unsigned long long)st.tier[KVT_TIER_HOST].used,
		(unsigned long long)st.enospc);
	CHECK(r < 0 || st.tier[KVT_TIER_HOST].used > 0);
	CHECK(st.enospc >= 1);
	CHECK_EQ(st.nvme_paused, 1);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.tier[KVT_TIER_NVME].used, 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used + st.tier[KVT_TIER_HOST].used, LAYERS * NPG);
	CHECK_EQ(st.pages, LAYERS * NPG);
	t_check_inv(p);

	/* Nothing lost: every page reads back (the fast tier's pages go down
	 * to the host tier on the way, no NVMe write needed). */
	kvt_pager_step(p);
	CHECK_EQ(t_verify_seq(p, s, &cfg, SEED, 0), LAYERS * NPG);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.tier[KVT_TIER_NVME].used, 0);
	t_check_inv(p);

	/* Disk has room again; after the pause the pages go down. */
	fault_set(p, NULL);
	usleep(150 * 1000);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.nvme_paused, 0);
	uint64_t enospc = st.enospc;
	CHECK_EQ(kvt_pager_drain(p, KVT_TIER_HOST), 0);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.enospc, enospc);
	CHECK_EQ(st.tier[KVT_TIER_HOST].used, 0);
	CHECK(st.tier[KVT_TIER_NVME].used > 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].used + st.tier[KVT_TIER_NVME].used, LAYERS * NPG);
	CHECK_EQ(st.lost_pages, 0);
	t_check_inv(p);

	kvt_pager_step(p);
	CHECK_EQ(t_verify_seq(p, s, &cfg, SEED, 0), LAYERS * NPG);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.csum_failures + st.io_errors, 0);
	t_check_inv(p);

	fault_close_empty(p, s, &st);
	t_close(p, dev);
	return 0;
}
