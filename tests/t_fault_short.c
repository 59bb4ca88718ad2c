/* SPDX-License-Identifier: MIT */
/*
 * Short NVMe reads (every second read request comes back with half its
 * bytes) are retried by the I/O path: with every page on NVMe, two full
 * passes read every page back bit-exact, nothing is lost, no error is
 * counted, and stats.short_ios counts the retries.
 */
#include <errno.h>
#include "fault_common.h"

#define LAYERS	2u
#define NPG	60u
#define SEED	31u

int main(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	kvt_seq_t s;

	/* The host tier holds everything, so each page is read once a pass. */
	t_config(&cfg, LAYERS, 4, 2 * LAYERS * NPG, 4 * NPG);
	cfg.prefetch_depth = 0;
	struct kvt_pager *p = fault_open_filled(&cfg, &dev, &s, SEED, NPG);

	struct kvt_fault f = { .short_every = 2 };
	for (int round = 0; round < 2; round++) {
		fault_push_to_nvme(p, LAYERS * NPG, &st);
		uint64_t short0 = st.short_ios, out0 = st.tier[KVT_TIER_NVME].bytes_out;

		fault_verify_under(p, s, &cfg, SEED, LAYERS * NPG, &f);

		CHECK_EQ(kvt_pager_stats(p, &st), 0);
		fprintf(stderr, "round %d: short_ios %llu, pages read %llu\n", round,
			(unsigned long long)(st.short_ios - short0),
			(unsigned long long)((st.tier[KVT_TIER_NVME].bytes_out - out0) /
					     st.tier[KVT_TIER_NVME].frame_bytes));
		CHECK(st.short_ios > short0);
		CHECK_EQ(st.tier[KVT_TIER_NVME].bytes_out - out0, LAYERS * NPG * kvt_pager_page_bytes(p));
		CHECK_EQ(st.lost_pages, 0);
		CHECK_EQ(st.io_errors, 0);
		CHECK_EQ(st.csum_failures, 0);
		t_check_inv(p);
	}

	fault_close_empty(p, s, &st);
	t_close(p, dev);
	return 0;
}
