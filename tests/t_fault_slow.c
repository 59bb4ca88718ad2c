/* SPDX-License-Identifier: MIT */
/*
 * Slow NVMe completions (each delayed 2 ms): every page still reads back
 * bit-exact, nothing is lost, and the NVMe tier's latency stats show it:
 * io_ns_max >= 2 ms and every read made under the fault lands in a
 * latency bucket of >= 1024 us. Then very slow ones (150 ms, more than
 * any wait inside the pager) with a batch twice the fast tier: every page
 * is still served, none reported -ENOSPC.
 */
#include <errno.h>
#include "fault_common.h"

#define LAYERS	2u
#define NPG	30u
#define SEED	37u
#define SLOW_US	2000u
#define VERY_SLOW_US 150000u
#define FAST	4u	/* fast tier pages */

/* Completions in buckets of >= 2^10 us (bucket b holds us < 2^b). */
static uint64_t slow_count(const struct kvt_tier_stats *t)
{
	uint64_t n = 0;
	for (int b = 11; b < KVT_LAT_BUCKETS; b++)
		n += t->lat_hist[b];
	return n;
}

int main(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	kvt_seq_t s;

	/* The host tier holds everything: each page is read exactly once. */
	t_config(&cfg, LAYERS, FAST, 2 * LAYERS * NPG, 4 * NPG);
	cfg.prefetch_depth = 0;
	struct kvt_pager *p = fault_open_filled(&cfg, &dev, &s, SEED, NPG);
	fault_push_to_nvme(p, LAYERS * NPG, &st);
	struct kvt_tier_stats before = st.tier[KVT_TIER_NVME];

	struct kvt_fault f = { .slow_us = SLOW_US };
	fault_verify_under(p, s, &cfg, SEED, LAYERS * NPG, &f);

	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	const struct kvt_tier_stats *nv = &st.tier[KVT_TIER_NVME];
	uint64_t reads = (nv->bytes_out - before.bytes_out) / nv->frame_bytes;
	fprintf(stderr, "reads %llu, io_ns_max %llu, slow completions %llu\n",
		(unsigned long long)reads, (unsigned long long)nv->io_ns_max,
		(unsigned long long)(slow_count(nv) - slow_count(&before)));
	CHECK_EQ(reads, LAYERS * NPG);
	CHECK(nv->io_ns_max >= (uint64_t)SLOW_US * 1000);
	CHECK(nv->io_count >= before.io_count + reads);
	CHECK(slow_count(nv) - slow_count(&before) >= reads);
	CHECK(nv->io_ns_total - before.io_ns_total >= reads * SLOW_US * 1000);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.io_errors + st.csum_failures, 0);
	t_check_inv(p);

	/* Fault gone: still right. */
	kvt_pager_step(p);
	CHECK_EQ(t_verify_seq(p, s, &cfg, SEED, 0), LAYERS * NPG);

	/* Very slow completions (longer than any internal wait) and a batch
	 * larger than the fast tier: it comes up in rounds, and every page is
	 * still served; slowness is no reason to report -ENOSPC. */
	t_drain_to_nvme(p);
	f.slow_us = VERY_SLOW_US;
	fault_set(p, &f);
	kvt_pager_step(p);
	{
		uint32_t idx[2 * FAST];
		struct kvt_batch *b;
		struct kvt_view v;
		unsigned got = 0;
		int r;
		for (unsigned i = 0; i < 2 * FAST; i++)
			idx[i] = 3 * i;		/* not neighbours: no coalescing */
		CHECK_EQ(kvt_acquire(p, s, 1, idx, 2 * FAST, &b), 0);
		while ((r = kvt_batch_next(b, &v)) != 0) {
			if (r != 1) {
				fprintf(stderr, "very slow: page %u: %s\n", v.page, strerror(-r));
				exit(1);
			}
			CHECK(t_check_view(&cfg, SEED, 1, &v) == 0);
			got++;
		}
		CHECK_EQ(got, 2 * FAST);
		kvt_batch_release(b);
	}
	fault_set(p, NULL);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK(st.tier[KVT_TIER_NVME].io_ns_max >= (uint64_t)VERY_SLOW_US * 1000);
	CHECK_EQ(st.lost_pages, 0);
	t_check_inv(p);

	fault_close_empty(p, s, &st);
	t_close(p, dev);
	return 0;
}
