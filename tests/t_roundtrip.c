/* SPDX-License-Identifier: MIT */
/* Every page's bytes survive fast -> host -> nvme -> host -> fast bit-exactly,
 * with the tiers far smaller than the working set, and with host_in_place. */
#include "common.h"
#include "pager/internal.h"

static void run(int in_place)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	char err[256];

	t_config(&cfg, 3, 8, 8, 512);
	cfg.host_in_place = in_place;
	struct kvt_pager *p = t_open(&cfg, &dev);
	kvt_seq_t s;
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	/* 161 tokens: 40 full pages and a tail of 1 per layer, 123 pages. */
	t_append(p, s, &cfg, 7, 0, 100);
	t_append(p, s, &cfg, 7, 100, 61);
	CHECK_EQ(kvt_seq_pages(p, s, 0), 41);
	CHECK_EQ(kvt_seq_tokens(p, s, 2), 161);
	for (int round = 0; round < 3; round++) {
		kvt_pager_step(p);
		CHECK_EQ(t_verify_seq(p, s, &cfg, 7, 0), 123);
		pthread_mutex_lock(&p->lock);
		int r = kvt_pager_check(p, err, sizeof(err));
		pthread_mutex_unlock(&p->lock);
		if (r)
			fprintf(stderr, "invariant: %s\n", err);
		CHECK_EQ(r, 0);
	}
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	/* The pages really went all the way down and came back up. */
	CHECK(st.tier[KVT_TIER_NVME].bytes_in > 0);
	CHECK(st.tier[KVT_TIER_NVME].bytes_out > 0);
	CHECK(st.tier[KVT_TIER_HOST].promotions > 0);
	if (!in_place)
		CHECK(st.tier[KVT_TIER_FAST].promotions > 0);
	else
		CHECK(st.host_in_place > 0);
	CHECK_EQ(st.lost_pages, 0);
	CHECK_EQ(st.acquires, 3 * 123);
	/* The tail (1 token) is short. */
	struct kvt_batch *b;
	struct kvt_view v;
	uint32_t last = 40;
	CHECK_EQ(kvt_acquire(p, s, 1, &last, 1, &b), 0);
	CHECK_EQ(kvt_batch_next(b, &v), 1);
	CHECK_EQ(v.ntok, 1);
	CHECK_EQ(v.tier, KVT_TIER_FAST);
	CHECK_EQ(kvt_batch_next(b, &v), 0);
	kvt_batch_release(b);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	/* The acquire prefetched page 40 of layer 2: a page still on its
	 * way when its sequence closes is freed as it lands. */
	t_quiesce(p);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.pages, 0);
	CHECK_EQ(st.tier[0].used + st.tier[1].used + st.tier[2].used, 0);
	t_close(p, dev);
}

int main(void)
{
	run(0);
	run(1);
	return 0;
}
